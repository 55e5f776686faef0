"""The team server: accounts, roles and permissions."""
