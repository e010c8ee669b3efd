"""nsqd's HTTP API on h11 (design §7): messages, the connection loop, the endpoints."""
