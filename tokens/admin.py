from django.contrib import admin

from .models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "scopes", "created_at", "revoked"]
    list_filter = ["revoked"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "created_at"]
    fields = ["name", "prefix", "scopes", "revoked", "created_at"]

    def has_add_permission(self, request):
        # The raw value is shown only once, so tokens are made with `manage.py create_api_token`.
        return False
