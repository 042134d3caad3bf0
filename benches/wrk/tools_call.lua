-- tools_call.lua: wrk sends MCP `tools/call` requests and checks every answer.
--
--   wrk -t1 -c64 -d5s --latency -s benches/wrk/tools_call.lua URL -- TOOL ARG [ACCEPT [SESSION]]
--
-- Without SESSION (2026-07-28): each request is one stateless POST: a JSON-RPC body calling
-- TOOL with {ARG: <token>} and the two required `_meta` keys (protocolVersion,
-- clientCapabilities), and the headers a 2026-07-28 client sends (MCP-Protocol-Version,
-- Mcp-Method, Mcp-Name, Accept, Content-Type). ACCEPT defaults to "application/json"; a
-- server that insists on both media types (fastmcp) is given "application/json,
-- text/event-stream".
--
-- With SESSION (2025-11-25, legacy): the requests belong to a session the caller opened
-- (initialize, notifications/initialized) and whose `Mcp-Session-Id` SESSION is; each POST
-- carries it and `MCP-Protocol-Version: 2025-11-25`, the body has no `_meta`, and no
-- Mcp-Method/Mcp-Name (that era has none). ACCEPT must then offer SSE: every answer must be
-- an event stream (Content-Type text/event-stream) and is checked by its one event whose
-- `data:` line is a JSON-RPC response (other events, such as a priming event with empty
-- data, are passed over; a stream with two responses fails).
--
-- Every request has its own id and token, both the string "w<thread>-<n>" (an echo server
-- sends the token back as the result's text). Every answer is checked: a 2xx status, a
-- "result", no `"isError":true`, and a result text equal to the answer's id (an answer
-- that carries one request's id and another request's result fails), each id answered at
-- most once. wrk itself does not link an answer to its request, so the check is on the
-- answer's own consistency plus the count of distinct ids.
--
-- done() prints one line, `WRK_RESULT {json}`, for benches/gateway_load.py: wrk's summary
-- (requests, duration, socket errors), latency percentiles in microseconds, and the
-- checks summed over threads: ok, non2xx, bad (with one sample body), dup.

local threads = {}
local next_thread = 1

function setup(thread)
   thread:set("tid", next_thread)
   next_thread = next_thread + 1
   table.insert(threads, thread)
end

local head, tail, legacy

function init(args)
   local tool = args[1] or "echo"
   local arg = args[2] or "token"
   local accept = args[3] or "application/json"
   local session = args[4]
   legacy = session ~= nil and session ~= ""
   wrk.method = "POST"
   wrk.headers["Content-Type"] = "application/json"
   wrk.headers["Accept"] = accept
   -- The body around the id/token, precomputed: per request only the token is spliced in.
   if legacy then
      wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
      wrk.headers["Mcp-Session-Id"] = session
      head = '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"' .. tool ..
         '","arguments":{"' .. arg .. '":"'
   else
      wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
      wrk.headers["Mcp-Method"] = "tools/call"
      wrk.headers["Mcp-Name"] = tool
      head = '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"' .. tool ..
         '","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
         '"io.modelcontextprotocol/clientCapabilities":{}},"arguments":{"' .. arg .. '":"'
   end
   tail = '"}},"id":"'
   sent, ok, non2xx, bad, dup = 0, 0, 0, 0, 0
   sample = ""
   seen = {}
   prefix = "w" .. tid .. "-"
end

function request()
   sent = sent + 1
   local token = prefix .. sent
   return wrk.format(nil, nil, nil, head .. token .. tail .. token .. '"}')
end

-- The event stream's one JSON-RPC response (the `data:` of an event carrying an "id" and a
-- "result" or an "error"), or nil when it is not an event stream or has none or several.
local function sse_response(headers, body)
   local sse = false
   for name, value in pairs(headers) do
      if name:lower() == "content-type" and value:find("text/event-stream", 1, true) then
         sse = true
      end
   end
   if not sse then return nil end
   local found
   for data in ("\n" .. body):gmatch("[\r\n]data: ?([^\r\n]*)") do
      if data:find('"id"', 1, true) and (data:find('"result"', 1, true)
                                         or data:find('"error"', 1, true)) then
         if found then return nil end
         found = data
      end
   end
   return found
end

function response(status, headers, body)
   if status < 200 or status > 299 then
      non2xx = non2xx + 1
      if sample == "" then sample = status .. " " .. body end
      return
   end
   local whole = body
   if legacy then
      body = sse_response(headers, body)
      if body == nil then
         bad = bad + 1
         if sample == "" then sample = "not one SSE response: " .. whole end
         return
      end
   end
   local id = body:match('"id":"([^"]*)"')
   local text = body:match('"text":"([^"]*)"')
   if id == nil or id ~= text or not body:find('"result"', 1, true)
      or body:find('"isError":true', 1, true) then
      bad = bad + 1
      if sample == "" then sample = body end
      return
   end
   if seen[id] then
      dup = dup + 1
      return
   end
   seen[id] = true
   ok = ok + 1
end

local function json_escape(s)
   return (s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end))
end

function done(summary, latency, requests)
   local t = {sent = 0, ok = 0, non2xx = 0, bad = 0, dup = 0}
   local first_sample = ""
   for _, thread in ipairs(threads) do
      for key, _ in pairs(t) do
         t[key] = t[key] + thread:get(key)
      end
      local s = thread:get("sample")
      if first_sample == "" and s ~= "" then first_sample = s end
   end
   local e = summary.errors
   local out = string.format(
      '{"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f},' ..
      '"sent":%d,"ok":%d,"non2xx":%d,"bad":%d,"dup":%d,"sample":"%s"}',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      latency.mean, t.sent, t.ok, t.non2xx, t.bad, t.dup, json_escape(first_sample:sub(1, 300)))
   io.write("WRK_RESULT " .. out .. "\n")
end
