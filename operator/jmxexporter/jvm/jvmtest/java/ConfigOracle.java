import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.regex.Pattern;
import javax.management.ObjectName;

/**
 * Asks the JDK itself what jmx_prometheus_javaagent 1.0.1 asks it when it
 * loads a configuration, so tests can hold deckhand's check against the
 * real thing: whether {@code Pattern.compile("^.*(?:" + pattern + ").*$")}
 * (JmxCollector.loadConfig) and {@code new ObjectName(name)} succeed.
 * Reads "regex BASE64" or "objectname BASE64" lines, prints "ok N" (N is
 * the pattern's group count) or "error MESSAGE" for each.
 */
public class ConfigOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            String[] parts = line.split(" ", 2);
            String text = new String(Base64.getDecoder().decode(parts.length > 1 ? parts[1] : ""), StandardCharsets.UTF_8);
            try {
                if (parts[0].equals("regex")) {
                    int groups = Pattern.compile("^.*(?:" + text + ").*$").matcher("").groupCount();
                    out.append("ok ").append(groups);
                } else {
                    new ObjectName(text);
                    out.append("ok 0");
                }
            } catch (Throwable t) {
                out.append("error ").append(String.valueOf(t).replace('\n', ' ').replace('\r', ' '));
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
