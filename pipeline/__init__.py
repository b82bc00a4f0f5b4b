"""The voice loop: session assembly on livekit-agents, the latency budget, audio I/O, the CLI.
The only package that imports livekit."""
