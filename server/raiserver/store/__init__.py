"""Where state lives: the database (engine, migrations, tables) and blob storage on disk."""
