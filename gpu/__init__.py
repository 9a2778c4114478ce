"""What runs on, and decides about, the single GPU thread: the thread itself, jobs, the fair queue (its settings, its
bookkeeping, admission, the order of steps, slow readers and its stats), the playback clock behind stream admission,
the engine pool and residency (which models stay in device memory). Which device models run on is the engines'
(`engines.device`): gpu/ builds on the engines, and never on the lifecycle or the web layer above it."""
