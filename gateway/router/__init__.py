"""ContainerRouter: the OpenWhisk action API on the hot path, routing into owned containers."""
