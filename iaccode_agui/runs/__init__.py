"""A run's lifecycle in this process: admission, assembly, the worker thread, resume, cancel, take-over, keeping."""
