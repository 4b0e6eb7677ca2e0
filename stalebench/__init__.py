"""The `stalebench` command (cli.py): the project's tools as one command with subcommands, for a person."""
