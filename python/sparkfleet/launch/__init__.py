"""The controller of a lane's life: plan, gates, launch, stop, status, generations, releases."""
