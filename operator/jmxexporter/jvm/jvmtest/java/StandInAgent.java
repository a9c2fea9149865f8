import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.lang.instrument.Instrumentation;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.openmbean.CompositeData;

/**
 * A stand-in for the Prometheus JMX exporter agent, which cannot be
 * downloaded here. Like the real one it takes "port:config-file", serves
 * MBean attributes as Prometheus text on /metrics, applies the rules of its
 * configuration (pattern, name, help, type; matched against
 * "domain<key=value, ...><compositeKey>attribute: value" as upstream does),
 * re-reads the configuration when the file changes, and calls
 * System.exit(1) when it cannot start: a port in use or a configuration it
 * cannot read takes the application down with it.
 */
public class StandInAgent {
    static final class Rule {
        Pattern pattern;
        String name, help = "", type = "UNTYPED";
    }

    static final class Config {
        boolean lowercaseOutputName;
        String jmxUrl = "";
        List<Rule> rules = new ArrayList<>();
    }

    static volatile Config config;
    static volatile long configModified;

    public static void premain(String args, Instrumentation inst) { start(args); }

    public static void agentmain(String args, Instrumentation inst) { start(args); }

    static void start(String args) {
        try {
            registerBuildInfo();
            int colon = args.indexOf(':');
            int port = Integer.parseInt(args.substring(0, colon));
            Path file = Path.of(args.substring(colon + 1));
            List<String> lines = Files.readAllLines(file, StandardCharsets.UTF_8);
            config = parse(lines);
            StandInAgentConfig.exitOnConfigError(config);
            StandInAgentConfig.requireDocument(lines);
            configModified = Files.getLastModifiedTime(file).toMillis();
            HttpServer server = HttpServer.create(new InetSocketAddress(port), 10);
            server.createContext("/metrics", exchange -> {
                byte[] body = scrape(file).getBytes(StandardCharsets.UTF_8);
                exchange.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
                exchange.sendResponseHeaders(200, body.length);
                try (OutputStream out = exchange.getResponseBody()) {
                    out.write(body);
                }
            });
            server.setExecutor(null);
            server.start();
            System.err.println("stand-in agent serving on port " + port);
        } catch (Throwable t) {
            System.err.println("stand-in agent failed to start: " + t);
            System.exit(1);
        }
    }

    static boolean buildInfoRegistered;

    /**
     * Upstream 1.0.1's JavaAgent.premain first registers the
     * jmx_exporter_build_info metric in PrometheusRegistry.defaultRegistry
     * (BuildInfoMetrics.register). A second load, of the same jar or a
     * renamed copy (the agent class comes from the system class loader
     * either way, with its static registry), finds the name taken: the
     * registry throws IllegalStateException and premain's catch calls
     * System.exit(1). Whatever port the second one was given.
     */
    static synchronized void registerBuildInfo() {
        if (buildInfoRegistered) {
            throw new IllegalStateException("Can't register jmx_exporter_build_info because a metric with that name is already registered.");
        }
        buildInfoRegistered = true;
    }

    /** A YAML subset: top-level booleans and a rules list of string fields. */
    static Config parse(List<String> lines) {
        Config c = new Config();
        Rule rule = null;
        boolean inRules = false;
        for (String raw : lines) {
            String line = raw.replaceAll("\\s+$", "");
            if (line.isBlank() || line.trim().startsWith("#")) continue;
            String trimmed = line.trim();
            boolean item = trimmed.startsWith("- ");
            if (item) trimmed = trimmed.substring(2).trim();
            int colon = trimmed.indexOf(':');
            if (colon < 0) throw new IllegalArgumentException("cannot parse config line: " + raw);
            String key = trimmed.substring(0, colon).trim();
            String scalar = trimmed.substring(colon + 1).trim();
            if (!Character.isWhitespace(line.charAt(0)) && !line.startsWith("-")) {
                inRules = key.equals("rules");
                if (key.equals("lowercaseOutputName")) c.lowercaseOutputName = StandInAgentConfig.bool(scalar);
                else if (StandInAgentConfig.remoteJvmSetting(c, key, scalar)) continue;
                else if (!inRules) throw new IllegalArgumentException("unknown key: " + key);
                continue;
            }
            if (!inRules) throw new IllegalArgumentException("unexpected line: " + raw);
            if (item) {
                rule = new Rule();
                c.rules.add(rule);
            }
            if (rule == null) throw new IllegalArgumentException("rule field outside a rule: " + raw);
            switch (key) {
                case "pattern": rule.pattern = Pattern.compile("^.*(?:" + StandInAgentConfig.patternText(scalar) + ").*$"); break;
                case "name": rule.name = StandInAgentConfig.string(scalar); break;
                case "help": rule.help = StandInAgentConfig.string(scalar); break;
                case "type": rule.type = StandInAgentConfig.string(scalar); break;
                default: throw new IllegalArgumentException("unknown rule field: " + key);
            }
        }
        return c;
    }

    static String unquote(String v) {
        if (v.length() >= 2 && (v.startsWith("'") && v.endsWith("'") || v.startsWith("\"") && v.endsWith("\""))) {
            return v.substring(1, v.length() - 1);
        }
        return v;
    }

    static String scrape(Path file) {
        try {
            long modified = Files.getLastModifiedTime(file).toMillis();
            if (modified != configModified) {
                config = parse(Files.readAllLines(file, StandardCharsets.UTF_8));
                configModified = modified;
            }
        } catch (Exception e) {
            // Like upstream: a broken reload keeps the previous configuration.
        }
        StandInAgentConfig.exitOnConfigError(config);
        Config c = config;
        StringBuilder out = new StringBuilder();
        buildInfo(out);
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        for (ObjectName name : server.queryNames(null, null)) {
            try {
                for (MBeanAttributeInfo attr : server.getMBeanInfo(name).getAttributes()) {
                    Object value;
                    try {
                        value = server.getAttribute(name, attr.getName());
                    } catch (Exception e) {
                        continue;
                    }
                    String bean = name.getDomain() + "<" + name.getKeyPropertyListString().replace(",", ", ") + ">";
                    if (value instanceof CompositeData) {
                        CompositeData cd = (CompositeData) value;
                        for (String key : cd.getCompositeType().keySet()) {
                            emit(c, out, bean + "<" + attr.getName() + ">" + key, cd.get(key));
                        }
                    } else {
                        emit(c, out, bean + attr.getName(), value);
                    }
                }
            } catch (Exception e) {
                // an MBean that went away meanwhile
            }
        }
        return out.toString();
    }

    /** Upstream serves jmx_exporter_build_info on every scrape (BuildInfoMetrics). */
    static void buildInfo(StringBuilder out) {
        out.append("# HELP jmx_exporter_build_info JMX Exporter build information\n");
        out.append("# TYPE jmx_exporter_build_info gauge\n");
        out.append("jmx_exporter_build_info{name=\"stand-in\",version=\"1.0.1\"} 1\n");
    }

    static void emit(Config c, StringBuilder out, String subject, Object value) {
        if (!(value instanceof Number)) return;
        String line = subject + ": " + value;
        for (Rule r : c.rules) {
            if (r.pattern == null) continue;
            Matcher m = r.pattern.matcher(line);
            if (!m.matches()) continue;
            String name = r.name == null ? subject.replaceAll("[^a-zA-Z0-9_]", "_") : m.replaceAll(r.name);
            if (c.lowercaseOutputName) name = name.toLowerCase();
            out.append("# HELP ").append(name).append(' ').append(r.help).append('\n');
            out.append("# TYPE ").append(name).append(' ').append(r.type.toLowerCase()).append('\n');
            out.append(name).append(' ').append(((Number) value).doubleValue()).append('\n');
            return;
        }
    }
}
