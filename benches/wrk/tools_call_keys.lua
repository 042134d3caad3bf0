-- tools_call_keys.lua: tools_call.lua's calls, each presenting the next of N API keys.
--
--   wrk -t1 -c64 -d5s --latency -s benches/wrk/tools_call_keys.lua URL -- TOOL ARG ACCEPT KEYS
--
-- KEYS is a file of API keys, one per line. The requests take the keys in turn
-- (`Authorization: Bearer <key>`, the first request the first key, after the last key the
-- first again), so a run of more calls than keys presents every key's identity, and the
-- calls in flight at once (fewer than N) each present a different one. The calls (2026-07-28
-- only: no session), their ids and tokens, every check of the answers and the WRK_RESULT
-- line are tools_call.lua's, loaded from beside this file.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "tools_call.lua")

local base_init, base_request = init, request
local bearers = {}
local turn = 0

function init(args)
   base_init({args[1], args[2], args[3]})
   local path = args[4]
   if path == nil then error("tools_call_keys.lua: no KEYS file given") end
   for line in io.lines(path) do
      if line ~= "" then bearers[#bearers + 1] = "Bearer " .. line end
   end
   if #bearers == 0 then error("tools_call_keys.lua: no key in " .. path) end
end

function request()
   turn = turn % #bearers + 1
   wrk.headers["Authorization"] = bearers[turn]
   return base_request()
end
