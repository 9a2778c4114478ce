"""What the tests share that is not a fixture: server processes, clips, tiny-model builders, the browser driver."""
