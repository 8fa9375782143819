"""One module per CLI command, each exposing ``command`` (a ``click.Command``).

``wallflame.cli`` discovers them, so adding a command never touches another command's file.
"""
