"""RunDirError: a run directory that cannot be read as the contract says, in one line that names
the file (and the line) so the user can look; never a traceback."""


class RunDirError(ValueError):
    pass
