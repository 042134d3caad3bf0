"""The parent side of the process boundary: the host process. The public ``Host`` API,
the merged catalog kept in step with the servers, the call path, and the supervision of
one worker process per server. Nothing here touches a server's pipes or sockets; it
reaches each server through its worker, over ``trunkline.channel``."""
