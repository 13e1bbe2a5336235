"""Exit codes shared by every ``inferplane`` subcommand, so CI can tell a refused plan from a broken input."""

EXIT_OK = 0
"""Fine: the plan fits, the checks pass."""
EXIT_REFUSED = 1
"""The plan is refused: a model that does not fit, a limit exceeded, a mandatory policy violated."""
EXIT_INVALID = 2
"""The input is invalid; the message names the file and the key."""
EXIT_FAILED = 3
"""The program (or a tool it drives) failed."""
