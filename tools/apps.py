from django.apps import AppConfig


class ToolsConfig(AppConfig):
    """Everything agent-facing: the tool catalogue and functions, the REST router, the MCP server."""

    name = "tools"
    verbose_name = "Agent tools"
