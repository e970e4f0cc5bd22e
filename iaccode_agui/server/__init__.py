"""The process: command line, settings from flags and variables, waitress and its threads, the managed runtime."""
