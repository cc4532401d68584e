"""The site as a whole, below every room: typed environment readers for the settings
(:mod:`~dashboard.site.env`), the login-required middleware, personal API tokens
(:mod:`~dashboard.site.tokens`: create, revoke, authenticate ``Bearer`` requests) and
the site-wide views (health check, the JSON-or-page 404).

May import: the project's root modules (``models``, ``jsonsafe``, ``errors``). Nothing
here knows about runs, events or pages; every other room may import it.
"""
