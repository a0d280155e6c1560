-- The release worker's released mark of an unsharded window (stream_dp/release/windows.py, mark_released),
-- fenced by its claim. Preludes: window_state, release_shard.
-- KEYS: claim, then meta, counts, users, offsets of the (only) shard ; ARGV: token, retention_seconds
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
release_shard(KEYS[2], {KEYS[3], KEYS[4], KEYS[5]}, tonumber(ARGV[2]))
return 1
