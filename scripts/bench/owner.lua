-- wrk script: owner POSTs, a new Idempotency-Key on every request.
-- Usage: wrk ... -s owner.lua URL -- PREFIX [PATH [AUTHORIZATION]]
-- PATH defaults to /api/items; with AUTHORIZATION (a bearer token's
-- "Bearer ...") the actor is the token's instead of X-Actor-Id.
-- The key is PREFIX-THREAD-COUNTER: PREFIX is random per run (bench.sh
-- passes it), THREAD is set per thread in setup(), COUNTER counts the
-- thread's requests, so no two requests of a run share a key.

dofile("scripts/bench/post.lua")

local next_thread = 1

function setup(thread)
	thread:set("thread_id", next_thread)
	next_thread = next_thread + 1
end

function init(args)
	prefix = args[1] or "owner"
	counter = 0
	-- wrk threads start with the same math.random state: seed each one.
	math.randomseed(os.time() * 1000 + thread_id)
	body = '{"name":"widget","qty":1,"tags":["bench"]}'
	path = args[2] or "/api/items"
	auth = args[3]
end

function request()
	counter = counter + 1
	return wrk.format("POST", path, post_headers(prefix .. "-" .. thread_id .. "-" .. counter, auth), body)
end
