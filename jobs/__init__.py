"""Jobs: hours of speech made in the background, durable across crashes (docs/api.md, "Jobs").

`job_settings` (its POLYTTS_* knobs), `pieces` (a text cut into the pieces a job is made of), `store` (the SQLite
job table and the piece files, written atomically), `assembly` (the finished file), `webhook` (the call when a job
ends), `runner` (jobs taken, bounded, synthesized piece by piece through the lifecycle, resumed after a restart)."""
