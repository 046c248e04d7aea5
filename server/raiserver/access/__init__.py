"""Who may do what: credentials, roles and their rules, the roster, the audit log, and the guards that
keep one client from holding the server."""
