"""What the tests share that is not a fixture: server processes and in-process apps, the polling helper, clips and
voices to register, tiny-model builders, the browser driver."""
