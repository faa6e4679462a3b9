-- wrk script: every request carries a different forged, well-formed API key.
--
-- A forged key has a random 52-character secret and a valid checksum (CRC-32 of the body as 7
-- base32 digits, most significant first: apikey_tui.keyformat.checksum), so it passes the
-- format check and reaches the key index. Its public id is random ("ak" + 16 characters, an
-- unknown-id flood) or, when given after `--`, a real key's (a wrong-secret flood):
--   wrk -s forge.lua URL -- [PUBLIC_ID] [PATH]
-- init() prints three samples ("SAMPLE <key>") so the benchmark can check the checksums, and
-- done() prints how many answers were 401, 503 and anything else.

local bit = require("bit")
local band, bxor, rshift = bit.band, bit.bxor, bit.rshift

local ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
local letters = {}
for i = 1, 32 do
  letters[i] = ALPHABET:sub(i, i)
end

local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if band(c, 1) ~= 0 then
      c = bxor(rshift(c, 1), 0xEDB88320)
    else
      c = rshift(c, 1)
    end
  end
  crc_table[i] = c
end

local function crc32(text)
  local c = -1
  for i = 1, #text do
    c = bxor(rshift(c, 8), crc_table[band(bxor(c, text:byte(i)), 255)])
  end
  return bxor(c, -1)
end

local function random_chars(n)
  local out = {}
  for i = 1, n do
    out[i] = letters[math.random(32)]
  end
  return table.concat(out)
end

local function checksum(body)
  local value = crc32(body)
  local digits = {}
  for i = 7, 1, -1 do
    digits[i] = letters[band(value, 31) + 1]
    value = rshift(value, 5)
  end
  return table.concat(digits)
end

local public_id = nil
local path = "/projects"

local function forge()
  local id = public_id or ("ak" .. random_chars(16))
  local body = id .. "." .. random_chars(52)
  return body .. checksum(body)
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  if args[1] ~= nil and args[1] ~= "" then
    public_id = args[1]
  end
  if args[2] ~= nil then
    path = args[2]
  end
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
  for _ = 1, 3 do
    io.write("SAMPLE ", forge(), "\n")
  end
  s401, s503, other = 0, 0, 0
end

function request()
  return wrk.format("GET", path, { ["Authorization"] = "ApiKey " .. forge() })
end

function response(status, headers, body)
  if status == 401 then
    s401 = s401 + 1
  elseif status == 503 then
    s503 = s503 + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local a, b, c = 0, 0, 0
  for _, thread in ipairs(threads) do
    a = a + thread:get("s401")
    b = b + thread:get("s503")
    c = c + thread:get("other")
  end
  io.write(string.format("STATUS 401=%d 503=%d other=%d\n", a, b, c))
end
