"""The command-line edge: argv, printing, and exit codes (DESIGN.md §2)."""
