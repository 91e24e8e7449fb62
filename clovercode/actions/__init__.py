"""What each tool does. Handlers take (ToolContext, arguments) and return an Observation."""
