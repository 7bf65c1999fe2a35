"""ContainerManager: the singleton that creates containers and divides them among routers."""
