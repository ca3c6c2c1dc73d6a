"""Memory's front door: the one package the server asks for memory."""
