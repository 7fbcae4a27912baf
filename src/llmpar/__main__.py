from llmpar.cli.main import main

main()
