"""Thin Typer commands: parse, call a service, render."""
