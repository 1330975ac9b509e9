"""Errors a service reports to the user (unknown names, refused state changes)."""

from __future__ import annotations


class ServiceError(Exception):
    """A request that cannot be carried out; the message says why in one line."""


class NotFound(ServiceError):
    """No job or node by that name or id."""
