"""forensics: read logs off a broken GPU host, find the incident, write the postmortem."""

__version__ = "0.1.0"
