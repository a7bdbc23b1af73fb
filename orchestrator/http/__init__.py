"""The daemon's HTTP face: the API app, its streams and OpenAI-compatible endpoint, the request
guard, the client the CLI and studio use, and Prometheus metrics."""
