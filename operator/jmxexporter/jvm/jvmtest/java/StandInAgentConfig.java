import java.util.List;
import java.util.regex.Pattern;

/**
 * How the stand-in agent reads its configuration where jmx_prometheus_javaagent
 * 1.0.1 would exit the JVM over it, so tests prove that the operator refuses
 * such a configuration before the agent sees it. Upstream reads the file with
 * SnakeYAML 2.2 (YAML 1.1 scalars) and casts values in
 * JmxCollector.loadConfig; the stand-in's own parser is a small subset, and
 * this class gives it upstream's typing and exits.
 */
final class StandInAgentConfig {
    private StandInAgentConfig() {}

    /** SnakeYAML's Resolver.BOOL: plain scalars that load as a Boolean. */
    private static final Pattern YAML11_BOOL = Pattern.compile(
            "yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF");

    private static boolean quoted(String raw) {
        return raw.length() >= 2
                && (raw.startsWith("'") && raw.endsWith("'") || raw.startsWith("\"") && raw.endsWith("\""));
    }

    /** What SnakeYAML loads a scalar as: a Boolean for a plain YAML 1.1 boolean. */
    static Object scalar(String raw) {
        if (!quoted(raw) && YAML11_BOOL.matcher(raw).matches()) {
            return raw.equalsIgnoreCase("yes") || raw.equalsIgnoreCase("true") || raw.equalsIgnoreCase("on");
        }
        return StandInAgent.unquote(raw);
    }

    /**
     * A rule's name, help or type: JmxCollector.loadConfig casts it,
     * {@code (String) yamlRule.get("name")}, so `name: on` is a
     * ClassCastException (at start the agent exits, JavaAgent.premain).
     */
    static String string(String raw) {
        return (String) scalar(raw);
    }

    /** lowercaseOutputName: {@code (Boolean) yamlConfig.get(...)}; `yes` is true, `y` a ClassCastException. */
    static boolean bool(String raw) {
        return (Boolean) scalar(raw);
    }

    /** A rule's pattern is concatenated, not cast: `pattern: on` is the regex "true". */
    static String patternText(String raw) {
        return String.valueOf(scalar(raw));
    }

    /**
     * Top-level hostPort and jmxUrl, as JmxCollector.loadConfig reads them
     * (hostPort becomes a jmxUrl); true when the key was one of them.
     */
    static boolean remoteJvmSetting(StandInAgent.Config c, String key, String raw) {
        switch (key) {
            case "hostPort":
                c.jmxUrl = "service:jmx:rmi:///jndi/rmi://" + scalar(raw) + "/jmxrmi";
                return true;
            case "jmxUrl":
                c.jmxUrl = string(raw);
                return true;
            default:
                return false;
        }
    }

    /**
     * JmxCollector.exitOnConfigError in agent mode: called after the first
     * load and on every scrape (getLatestConfig), so a reloaded file that
     * sets hostPort or jmxUrl exits the JVM too.
     */
    static void exitOnConfigError(StandInAgent.Config c) {
        if (c.jmxUrl != null && !c.jmxUrl.isEmpty()) {
            System.err.println("stand-in agent: Configuration error: When running jmx_exporter as a Java agent,"
                    + " you must not configure 'jmxUrl' or 'hostPort' because you don't want to monitor a remote JVM.");
            System.err.flush();
            System.exit(-1);
        }
    }

    /**
     * HTTPServerFactory.createMapAccessor: an empty document loads as null
     * and {@code new YamlMapAccessor(null)} throws "Map is null" at start.
     */
    static void requireDocument(List<String> lines) {
        for (String line : lines) {
            String t = line.trim();
            if (!t.isEmpty() && !t.startsWith("#") && !t.equals("---")) {
                return;
            }
        }
        throw new IllegalArgumentException("Exception loading exporter YAML file: Map is null");
    }
}
