"""Command line (thin: every command calls the library)."""
import click


@click.group()
def main() -> None:
    """forensics: log forensics and incident reports."""
