"""A real deploy into a local emulator: the shim and the checks that need no deploy."""
