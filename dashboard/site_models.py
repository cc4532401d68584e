"""What the site keeps beside runs: judge endpoints (an admin's allow-list), users'
API tokens and settings, uploaded datasets, and the workers' announcements.

Re-exported by :mod:`dashboard.models` (``from dashboard.models import ApiToken``
works as before); Django registers them in the ``dashboard`` app.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class JudgeEndpoint(models.Model):
    """An OpenAI-compatible judge endpoint a run config may name (admin-set allow-list).

    Run configs refer to it by ``name`` only; the base URL and key never leave the
    server except to the worker that calls the judge.
    """

    name = models.SlugField(max_length=64, unique=True)
    base_url = models.URLField(max_length=500)
    api_key = models.CharField(max_length=500, blank=True, default="")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A personal API token (``Authorization: Bearer <token>``), acting as its user.

    Only a SHA-256 digest is stored: the token is shown once, when created. Tokens are
    256-bit random strings, so an unsalted digest is enough (as for GitHub's tokens).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)  # shown in lists to tell tokens apart
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class AccountSettings(models.Model):
    """A user's own settings (``/settings/``): where their runs' alerts are posted.

    ``webhook_url``: http(s) only, checked by ``dashboard.site.account``; empty: no
    notification. Every alert stored for one of the user's runs is POSTed there,
    off the request path (``dashboard.ingest.webhooks``)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="account_settings",
    )
    webhook_url = models.CharField(max_length=500, blank=True, default="")
    # The last POST to it: {"at", "ok", "status" or "error", "detector", "run"}.
    last_delivery = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"settings of {self.user_id}"


class WebhookDelivery(models.Model):
    """One alert notification owed to a user's webhook (``dashboard.ingest.webhooks``).

    Stored in the transaction that stores its alert, so a process that stops before
    sending it leaves it to the next sender (any process's); sent to the user's
    current URL, retried with a growing delay while the receiver is down or answers
    5xx/408/429, until ``delivered`` or ``failed`` (a refusal, or every retry spent).
    ``claimed_until``: a sender holds it until then (two processes never send one
    twice at once; a sender that died frees it when that passes)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="webhook_deliveries",
    )
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    next_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    # The last try: {"at", "ok", "status" or "error"}.
    last_result = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["status", "next_at"], name="webhook_due"),
            models.Index(fields=["user", "-created_at"], name="webhook_recent"),
        ]

    def __str__(self) -> str:
        return f"webhook delivery {self.pk} ({self.status})"


class Dataset(models.Model):
    """A dataset a user uploaded on ``/datasets/``: a file the trainer's own reader
    accepted, stored under ``<first data root>/uploads/<owner id>/`` (only its owner's
    runs may read it, :mod:`dashboard.library.roots`)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets"
    )
    name = models.CharField(max_length=200)
    path = models.CharField(max_length=1024)
    rows = models.PositiveIntegerField()
    fields = models.JSONField(default=list)
    prompt_key = models.CharField(max_length=64, default="prompt")
    answer_key = models.CharField(max_length=64, default="answer")
    size = models.BigIntegerField()
    # The first rows as text, columns and their types, kept at upload so showing
    # them never parses the file (dashboard.library.previews); None: stored before
    # previews were kept, computed on first view.
    preview = models.JSONField(null=True, blank=True, default=None)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "name"], name="dataset_owner_name"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Worker(models.Model):
    """A Celery worker's announcement of what it serves (``dashboard.runs.devices``):
    the queues it consumes, its devices and their memory, refreshed every
    ``WORKER_ANNOUNCE_SECONDS`` while it lives. Submit reads the live ones to refuse a
    run no worker would take, and one that cannot fit in any."""

    name = models.CharField(max_length=255, unique=True)  # Celery's node name
    queues = models.JSONField(default=list)  # without DASHBOARD_NAMESPACE's prefix
    cuda_devices = models.PositiveIntegerField(default=0)
    devices = models.PositiveIntegerField(default=1)  # what it gives one run
    gpu_memory_bytes = models.BigIntegerField(null=True, blank=True)  # per GPU
    ram_bytes = models.BigIntegerField(null=True, blank=True)
    seen_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
