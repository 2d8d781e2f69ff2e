"""The database seam: every hot-path statement, one module per database."""
