"""The MCP gateway, end to end."""
