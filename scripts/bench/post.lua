-- Shared by owner.lua and replay.lua (loaded with dofile from the
-- repository root, where scripts/bench.sh runs wrk): the headers of a bench
-- POST with Idempotency-Key key, as actor X-Actor-Id: bench, or with the
-- Authorization value auth when there is one (actor jwt routes).
function post_headers(key, auth)
	local headers = {
		["Idempotency-Key"] = key,
		["Content-Type"] = "application/json",
	}
	if auth then
		headers["Authorization"] = auth
	else
		headers["X-Actor-Id"] = "bench"
	end
	return headers
end
