"""Command-line interface (click + rich). Nothing below cli/ prints."""
