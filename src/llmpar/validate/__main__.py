"""``python -m llmpar.validate``: print the validation tables of docs/validation.md (markdown)."""

from llmpar.validate.runner import evaluate_all, summary


def main() -> None:
    results = evaluate_all()
    for name, rows in results.items():
        print(f"\n### {name}\n")
        if name.startswith("korthikanti"):
            print("| model | recompute | SP | b | v | published s | llmpar s | error | llmpar MFU |")
            print("|---|---|---|---|---|---|---|---|---|")
            for r in rows:
                print(f"| {r.run.model} | {r.run.recompute} | {'yes' if r.run.sp else 'no'} | {r.micro_batch} | "
                      f"{r.virtual_stages} | {r.run.iteration_time_s:.2f} | {r.predicted_time_s:.2f} | "
                      f"{r.error * 100:+.1f} % | {r.mfu * 100:.1f} % |")
        else:
            print("| model | GPUs | tp | pp | dp | B | best b | best v | published TFLOP/s | llmpar TFLOP/s | error |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for r in rows:
                print(f"| {r.run.model} | {r.run.gpus} | {r.run.tp} | {r.run.pp} | {r.run.dp} | {r.run.global_batch} | "
                      f"{r.micro_batch} | {r.virtual_stages} | {r.run.tflops_per_gpu:.0f} | "
                      f"{r.predicted_tflops_per_gpu:.1f} | {r.error * 100:+.1f} % |")
        mean, worst = summary(rows)
        print(f"\nmean |error| {mean * 100:.2f} %, max {worst * 100:.2f} %")
    allrows = [r for rows in results.values() for r in rows]
    mean, worst = summary(allrows)
    print(f"\nall rows: mean |error| {mean * 100:.2f} %, max {worst * 100:.2f} %")


if __name__ == "__main__":
    main()
