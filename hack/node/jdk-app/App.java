import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;

/**
 * The real node's Java application (deckhand-local/jdk-app): a small HTTP
 * server on port 8080 that says which JVM answers (its PID), and otherwise
 * stays alive, so the JMX exporter controller has a running JVM to attach
 * to in a real container.
 */
public class App {
    public static void main(String[] args) throws Exception {
        String port = System.getenv().getOrDefault("APP_PORT", "8080");
        long pid = ProcessHandle.current().pid();
        HttpServer server = HttpServer.create(new InetSocketAddress(Integer.parseInt(port)), 0);
        server.createContext("/", exchange -> {
            byte[] body = ("jdk-app pid " + pid + " java " + System.getProperty("java.version") + "\n")
                    .getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
        System.out.println("app started on " + port + " pid " + pid + " "
                + ManagementFactory.getRuntimeMXBean().getInputArguments());
        System.out.flush();
        Thread.currentThread().join();
    }
}
