"""The run machinery: requests and their checks, jobs, the run lifecycle, worker processes, scale-out,
the workspace and progress."""
