from __future__ import annotations

from django import forms
from django.contrib import admin

from dashboard.models import Alert, Checkpoint, JudgeEndpoint, Run, RunAttempt


class JudgeEndpointForm(forms.ModelForm):
    base_url = forms.URLField(
        max_length=500, assume_scheme="https", help_text="e.g. http://gpu-box:8000/v1"
    )
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the current key.",
    )

    class Meta:
        model = JudgeEndpoint
        fields = ["name", "base_url", "api_key", "enabled"]

    def clean_api_key(self) -> str:
        key = self.cleaned_data.get("api_key") or ""
        return key or (self.instance.api_key if self.instance.pk else "")


@admin.register(JudgeEndpoint)
class JudgeEndpointAdmin(admin.ModelAdmin):
    """The allow-list of OpenAI-compatible judge endpoints run configs may name."""

    form = JudgeEndpointForm
    list_display = ["name", "base_url", "enabled", "created_at"]
    list_filter = ["enabled"]


class RunAttemptInline(admin.TabularInline):
    """Each attempt's outcome, with the traceback the run's owner never sees."""

    model = RunAttempt
    extra = 0
    can_delete = False
    fields = ["number", "started_at", "ended_at", "outcome", "message", "detail"]
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    inlines = [RunAttemptInline]
    list_display = ["name", "owner", "status", "attempt", "last_step", "created_at"]
    list_filter = ["status", "queue"]
    search_fields = ["name", "owner__username", "id"]
    readonly_fields = [
        "id",
        "owner",
        "config",
        "parent",
        "status",
        "queue",
        "attempt",
        "lease",
        "heartbeat_at",
        "cancel_requested",
        "last_step",
        "frame_seq",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "detector", "severity"]
    list_filter = ["severity", "detector"]
    readonly_fields = ["run", "step", "detector", "severity", "message", "evidence"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "attempt", "path", "created_at"]
    readonly_fields = ["run", "step", "attempt", "path", "created_at"]
