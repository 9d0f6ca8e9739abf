"""Compositions over whole lanes and hosts: the supervisor, doctor, bootstrap, fleet check, power."""
