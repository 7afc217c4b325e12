"""The engine: slots, scheduler, model runner, sampling, and the anyio loop that ties them."""
