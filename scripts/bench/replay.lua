-- wrk script: replays, cycling over a fixed set of completed keys.
-- Usage: wrk ... -s replay.lua URL -- PREFIX COUNT [PATH [AUTHORIZATION]]
-- (PATH and AUTHORIZATION as in owner.lua.)
-- The keys are PREFIX-0 .. PREFIX-(COUNT-1); bench.sh completes each one
-- first with the same body, so every request here is answered from the
-- record. Each thread starts at its own offset in the cycle.

dofile("scripts/bench/post.lua")

local next_thread = 1

function setup(thread)
	thread:set("thread_id", next_thread)
	next_thread = next_thread + 1
end

function init(args)
	prefix = args[1] or "replay"
	count = tonumber(args[2] or "100")
	math.randomseed(os.time() * 1000 + thread_id)
	pos = math.random(0, count - 1)
	body = '{"name":"widget","qty":1,"tags":["bench"]}'
	path = args[3] or "/api/items"
	auth = args[4]
end

function request()
	pos = (pos + 1) % count
	return wrk.format("POST", path, post_headers(prefix .. "-" .. pos, auth), body)
end
