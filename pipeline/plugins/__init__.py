"""livekit-agents plugins over Parley's engines: thin adapters; the engines stay framework-free."""
