"""The shell: the command line, settings, ``serve`` and the agent's wiring. Nothing imports
it but entry points."""
