-- One shard of a sharded window released, after the fenced step (stream_dp/release/windows.py,
-- finish_released). Preludes: window_state, release_shard.
-- KEYS: meta, counts, users, offsets of the shard ; ARGV: retention_seconds
release_shard(KEYS[1], {KEYS[2], KEYS[3], KEYS[4]}, tonumber(ARGV[1]))
return 1
