"""The MCP gateway (``ctrlrun gateway``; needs the optional ``mcp`` extra: ``pip install
'ctrlrun[gateway]'``): an MCP server in front of one upstream MCP server that gives the
upstream's tool calls the decorator's guarantees. ``forward.py`` forwards one tool call;
``serve.py`` starts the gateway."""
