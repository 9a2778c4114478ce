"""What runs on, and decides about, the single GPU thread: the thread itself, jobs, the fair queue and its policy,
the playback clock behind stream admission, the engine pool, residency (which models stay in device memory) and the
runtime (which device)."""
