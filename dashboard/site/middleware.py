"""Login required everywhere, except the JSON API (which answers 401 instead of a
redirect, see ``dashboard.api``) and views marked ``login_not_required``."""

from __future__ import annotations

from django.contrib.auth.middleware import LoginRequiredMiddleware as _Base


class LoginRequiredMiddleware(_Base):
    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
