"""The refusals every room raises and every adapter answers: a :class:`ServiceError`
carries ``field: message`` lines and the HTTP status the API and the pages give it.
Below every room, so the rooms that check input (runs, library, site, reads) share
one kind of error without importing each other."""

from __future__ import annotations


class ServiceError(Exception):
    """A refusal the caller shows the user: ``errors`` are ``field: message`` lines."""

    status = 400

    def __init__(self, errors: list[str] | str) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("; ".join(self.errors))


class InvalidConfig(ServiceError):
    status = 400


class Conflict(ServiceError):
    status = 409


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    """Something of a run the user may read that does not exist (yet): a model of a
    run with no checkpoint. Another user's run is Http404, never this."""

    status = 404
