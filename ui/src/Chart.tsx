// A thin Preact wrapper around uPlot: one chart, data replaced on update.
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface ChartProps {
  title: string;
  data: uPlot.AlignedData;
  series: uPlot.Series[];
  /** x is unix seconds (time axis) unless false. */
  time?: boolean;
  /** Log-2 x axis (concurrency, prompt lengths): ticks at the data's x values. */
  xLog?: boolean;
  xLabel?: string;
  yLabel?: string;
  yFormat?: (v: number) => string;
  height?: number;
  testId?: string;
}

export const PALETTE = ["#f29d38", "#4c8bf5", "#3fb37f", "#d9534f", "#9b59b6", "#7f8c8d"];

export function Chart(props: ChartProps) {
  const host = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  // The theme is part of the shape: axis colours come from its CSS variables.
  const theme = typeof document === "undefined" ? "" : document.documentElement.dataset.theme ?? "";
  const shape = JSON.stringify([props.series.map((s) => s.label), props.time, props.xLog, props.xLabel, props.yLabel, theme]);

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    const width = Math.max(240, el.clientWidth || 600);
    const yFormat = props.yFormat;
    const css = getComputedStyle(document.documentElement);
    const axis = css.getPropertyValue("--muted").trim() || "#9aa3b2";
    const grid = css.getPropertyValue("--grid").trim() || "#2a3040";
    const opts: uPlot.Options = {
      title: props.title,
      width,
      height: props.height ?? 260,
      scales: { x: props.xLog ? { time: false, distr: 3, log: 2 } : { time: props.time !== false } },
      axes: [
        {
          label: props.xLabel,
          stroke: axis,
          grid: { stroke: grid },
          splits: props.xLog ? (u) => [...(u.data[0] as number[])] : undefined,
        },
        {
          label: props.yLabel,
          stroke: axis,
          grid: { stroke: grid },
          size: 70,
          values: yFormat ? (_u, splits) => splits.map((v) => yFormat(v)) : undefined,
        },
      ],
      series: [{ label: props.xLabel ?? (props.time === false ? "x" : "time") }, ...props.series],
    };
    plot.current = new uPlot(opts, props.data, el);
    const resize = () => plot.current?.setSize({ width: Math.max(240, el.clientWidth), height: props.height ?? 260 });
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      plot.current?.destroy();
      plot.current = null;
    };
    // Rebuild only when the chart's shape changes; data updates below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape]);

  useEffect(() => {
    plot.current?.setData(props.data);
  }, [props.data]);

  return <div class="chart" ref={host} data-testid={props.testId} />;
}
