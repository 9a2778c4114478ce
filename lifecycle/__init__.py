"""The request lifecycle every speech route shares: the service built once per process, the voice catalog, one
synthesis from plan to log line, metrics, and joining a fleet."""
