"""A job's life and everything that decides it: submissions, the lifecycle with every state change,
fair share, quotas, queue views, retention."""
